"""Ways to coordinate a synchronous PS step, everything else equal, against their floors.

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
Keras model and optimizer, 100 steps per call) to the rotation. ``--floors`` adds what a
synchronous design is measured against:

* ``async_call``: no coordination at all. The same loop and round trip, but the call
  applies its own gradient at once and hands the parameters back (asynchronous PS
  training's step): what one ``RemoteCall`` per worker step costs by itself, the floor
  of any design that makes one. Its "update" is one step of each worker (N gradients,
  as a synchronous update takes), the workers never waiting for each other.
* ``async_direct``: the same step without ``RemoteCall``: the loop reads the ps's
  variables and applies to them itself, so TensorFlow partitions the loop between the
  worker and the ps and moves each tensor with a send and a receive (the other transport
  a worker loop has).
* ``mwms``: the baseline of issue 27's goal. Two worker processes, no ps, the same model,
  batch and SGD as a ``MultiWorkerMirroredStrategy`` custom loop (the gradients summed by
  the Keras optimizer's all-reduce, as in ``benchmarks/sync_backup.py``), timed on worker 0.

Designs alternate, round by round; ratios against ``mwms`` are per round, then the median.

    python benchmarks/sync_step_designs.py [--updates N] [--rounds R] [--trainer] [--floors] [--json]

This is a measurement of the step's coordination only, not a trainer: it has no backup
workers, no timeout, no failure handling and no statistics.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.runtime.sync.cluster

from sync_chief import run_chief  # noqa: E402 - beside this file; imports no TensorFlow

DESIGNS = ("loop", "apply_in_call")
FLOORS = ("async_call", "async_direct", "mwms")
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

    def apply_now(self, flat: Any) -> list[Any]:
        """``async_call`` / ``async_direct``: one worker's gradient applied as it comes."""
        tf = self.tf
        pieces = tf.split(flat, self.sizes)
        return [p.assign_sub(LR * tf.reshape(g, s)) for p, g, s in zip(self.params, pieces, SHAPES, strict=True)]

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
                if self.design == "async_call":
                    with tf.control_dependencies(self.apply_now(flat)):
                        values = [tf.identity(p.read_value()) for p in self.params]
                    return [tf.ensure_shape(label, []), *values]
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

        def direct(steps: Any) -> Any:
            x = tf.random.stateless_uniform((32, 64), [1, 2])
            y = tf.random.stateless_uniform((32,), [3, 4], 0, 10, tf.int32)
            i = tf.constant(0, tf.int64)
            while i < steps:
                w = [p.read_value() for p in self.params]
                with tf.GradientTape() as tape:
                    tape.watch(w)
                    logits = tf.nn.relu(x @ w[0] + w[1]) @ w[2] + w[3]
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
                flat = tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, w)], 0)
                with tf.device(self.ps):
                    applied = self.apply_now(flat)
                with tf.control_dependencies(applied):
                    i += 1
            return i

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

        return tf.function(direct if self.design == "async_direct" else loop,
                           input_signature=[tf.TensorSpec([], tf.int64)])

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
    if design.startswith("async"):
        applied = updates  # each worker's ``updates`` steps; nothing counts versions
    print("RESULT " + json.dumps({"ms_per_update": 1000 * wall / applied, "applied": applied,
                                  "dropped": int(step.dropped.numpy())}), flush=True)
    os._exit(0)  # the coordinator's threads would hold the exit


def mwms_worker(updates: int) -> None:
    """One of ``mwms``'s two workers: the digits-sized MLP on a fixed batch, SGD, warmed
    up, then ``updates`` steps; worker 0 reports."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    first = json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0
    with strategy.scope():
        w = [tf.Variable(tf.random.stateless_normal(s, [i, 0]) * 0.1) for i, s in enumerate(SHAPES)]
        opt = keras.optimizers.SGD(LR)
    x = tf.random.stateless_uniform((32, 64), [1, 2])
    y = tf.random.stateless_uniform((32,), [3, 4], 0, 10, tf.int32)

    def replica_step() -> None:
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(x @ w[0] + w[1]) @ w[2] + w[3]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)) / 2
        opt.apply_gradients(zip(tape.gradient(loss, w), w, strict=True))  # summed over the 2 workers

    @tf.function
    def train(n: Any) -> Any:
        for _ in tf.range(n):
            strategy.run(replica_step)
        return tf.constant(0)

    train(tf.constant(20)).numpy()  # traced, warm
    if first:
        print("READY", flush=True)
    t0 = time.monotonic()
    train(tf.constant(updates)).numpy()
    wall = time.monotonic() - t0
    if first:
        print("RESULT " + json.dumps({"ms_per_update": 1000 * wall / updates}), flush=True)
    os._exit(0)  # the collective executor's threads would hold the exit


def run_mwms(updates: int) -> tuple[dict[str, Any], dict[str, float]]:
    """``mwms``: two workers on 127.0.0.1 (ports held until they bind, as in
    ``LocalCluster``); worker 0's result and each worker's CPU ms per update."""
    from sync_backup import _cpu_seconds

    socks = []
    for _ in range(2):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
    cluster = {"worker": [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]}
    procs = []
    try:
        for i in range(2):
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                       TF_GRPC_REUSE_PORT="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT / "src"))
            argv = [sys.executable, __file__, "--role-mwms", "--updates", str(updates)]
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
        assert procs[0].stdout is not None
        lines = iter(procs[0].stdout.readline, "")
        if next((x for x in lines if x.startswith("READY")), None) is None:
            raise RuntimeError(f"mwms worker 0 ended before it was ready (exit {procs[0].wait()})")
        cpu0 = [_cpu_seconds(p.pid) for p in procs]
        line = next((x for x in lines if x.startswith("RESULT ")), "")
        tasks = {f"worker-{i}": round(1000 * (_cpu_seconds(p.pid) - cpu0[i]) / updates, 2)
                 for i, p in enumerate(procs)}
        if any(p.wait(timeout=60) != 0 for p in procs) or not line:
            raise RuntimeError(f"an mwms worker failed (exits {[p.returncode for p in procs]})")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for sock in socks:
            sock.close()
    return json.loads(line[7:]), tasks


def one_run(design: str, updates: int) -> dict[str, Any]:
    if design == "mwms":
        result, tasks = run_mwms(updates)
        return {"design": design, "ms_per_update": result["ms_per_update"], "task_cpu_ms": tasks,
                "dropped": 0, "load": os.getloadavg()[0]}
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
    parser.add_argument("--floors", action="store_true", help="add async_call, async_direct and mwms")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--role-chief", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--role-mwms", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role_chief is not None:
        chief(args.role_chief, args.updates)
        return
    if args.role_mwms:
        mwms_worker(args.updates)
        return
    designs = [*DESIGNS, *(["trainer"] if args.trainer else []), *(FLOORS if args.floors else [])]
    runs = []
    for rnd in range(args.rounds):
        for design in designs if rnd % 2 == 0 else designs[::-1]:
            r = one_run(design, args.updates)
            runs.append(r)
            print(f"round {rnd} {design}: {r['ms_per_update']:.2f} ms/update, tasks {r['task_cpu_ms']}, "
                  f"load {r['load']:.1f}", file=sys.stderr, flush=True)
    summary = {d: {"ms_per_update": round(statistics.median(r["ms_per_update"] for r in runs if r["design"] == d), 2),
                   "ps_cpu_ms": round(statistics.median(r["task_cpu_ms"].get("ps-0", 0.0) for r in runs
                                                        if r["design"] == d), 2),
                   "cpu_ms": round(statistics.median(sum(r["task_cpu_ms"].values()) for r in runs
                                                     if r["design"] == d), 2)}
               for d in designs}
    if "mwms" in designs:  # per round: this design's time over the same round's mwms
        base = [r["ms_per_update"] for r in runs if r["design"] == "mwms"]
        for d in designs:
            mine = [r["ms_per_update"] for r in runs if r["design"] == d]
            summary[d]["x_mwms"] = round(statistics.median(a / b for a, b in zip(mine, base, strict=True)), 2)
    print(json.dumps({"median": summary, "runs": runs, "updates": args.updates}, indent=None if args.json else 1))


if __name__ == "__main__":
    main()
