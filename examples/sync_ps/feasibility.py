"""Feasibility check: a ConditionalAccumulator on a ps, driven from ClusterCoordinator.

Run it as a job (chief + 2 workers + 1 ps; the ps and workers serve, the chief checks and
prints one JSON line)::

    tfdist run --chief --workers 2 --ps 1 -- python examples/sync_ps/feasibility.py

It checks:

* gradients applied from worker closures are averaged by a take on the coordinator;
* a gradient whose local_step is below the accumulator's global step is dropped;
* a blocking take (issued before the gradients arrive) completes when run on an async
  eager executor, and stalls the closures when run on the default synchronous executor.
"""

from __future__ import annotations

import json
import os
import threading
import time

from tfdist import runtime


def main() -> None:
    strategy = runtime.strategy()  # ps and worker tasks serve here until stopped
    import tensorflow as tf
    from tensorflow.python.eager import context, executor

    coord = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        step = tf.Variable(0, dtype=tf.int64)
    dev = "/job:ps/replica:0/task:0/device:CPU:0"
    with tf.device(dev):
        h = tf.raw_ops.ResourceConditionalAccumulator(
            dtype=tf.float32, shape=[2], shared_name="feasibility", reduction_type="MEAN"
        )

    @tf.function
    def apply(value):
        local = step.read_value()
        with tf.device(dev):
            tf.raw_ops.ResourceAccumulatorApplyGradient(
                handle=h, local_step=local, gradient=tf.fill([2], value)
            )
        return local

    @tf.function
    def apply_old():
        with tf.device(dev):
            tf.raw_ops.ResourceAccumulatorApplyGradient(
                handle=h, local_step=tf.constant(0, tf.int64), gradient=tf.ones([2])
            )
        return tf.constant(0)

    @tf.function
    def take(n):
        with tf.device(dev):
            return tf.raw_ops.ResourceAccumulatorTakeGradient(handle=h, num_required=n, dtype=tf.float32)

    @tf.function
    def num():
        with tf.device(dev):
            return tf.raw_ops.ResourceAccumulatorNumAccumulated(handle=h)

    @tf.function
    def set_step(g):
        with tf.device(dev):
            tf.raw_ops.ResourceAccumulatorSetGlobalStep(handle=h, new_global_step=g)
        return tf.constant(0)

    out = {}
    for v in (1.0, 2.0, 6.0):
        coord.schedule(apply, args=(tf.constant(v),))
    coord.join()
    out["averaged_from_closures"] = take(tf.constant(3)).numpy().tolist()  # [3, 3]
    set_step(tf.constant(1, tf.int64))
    step.assign(1)
    coord.schedule(apply_old)
    coord.join()
    out["after_stale_apply_num_accumulated"] = int(num().numpy())  # 0: dropped

    def blocking_take(use_async: bool, box: dict) -> None:
        if use_async:
            ex = executor.new_executor(enable_async=True)
            with context.executor_scope(ex):
                t = take(tf.constant(2))
            ex.wait()
        else:
            t = take(tf.constant(2))
        box["value"] = t.numpy().tolist()

    for use_async in (True, False):  # the sync one last: it leaves the ps stuck
        box: dict = {}
        th = threading.Thread(target=blocking_take, args=(use_async, box), daemon=True)
        th.start()
        time.sleep(1.0)
        for _ in range(2):
            coord.schedule(apply, args=(tf.constant(5.0),))
        th.join(10)
        key = "blocking_take_async_executor" if use_async else "blocking_take_sync_executor"
        out[key] = box.get("value", "stalled (10 s)")
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
