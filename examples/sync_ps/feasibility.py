"""Feasibility check: a ConditionalAccumulator on a ps, driven from ClusterCoordinator.

Starts chief + 2 workers + 1 ps on 127.0.0.1 (the chief is this script, re-run as a
subprocess) and checks, printing one JSON line:

* gradients applied from worker closures are averaged by a take on the coordinator;
* a gradient whose local_step is below the accumulator's global step is dropped;
* a blocking take (issued before the gradients arrive) completes when run on an async
  eager executor, and stalls the closures when run on the default synchronous executor.

    python examples/sync_ps/feasibility.py
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))


def chief() -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    from tensorflow.python.eager import context, executor

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
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


def main() -> None:
    if "--chief" in sys.argv:
        chief()
        return
    from tfdist.runtime.sync_local import LocalCluster, last_json

    with LocalCluster(workers=2, ps=1) as cluster:
        proc = cluster.run_chief(
            [sys.executable, __file__, "--chief"],
            timeout=180,
            extra_env={"PYTHONPATH": str(ROOT / "src")},
        )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(proc.returncode)
    print(json.dumps(last_json(proc.stdout)))


if __name__ == "__main__":
    main()
