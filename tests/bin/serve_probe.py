"""Serve on this task's TF_CONFIG port, let the test probe it, then train a few steps.

Writes PROBE_DIR/<task>.port once its gRPC server listens and waits (up to 120 s) for
PROBE_DIR/go. Under multi_worker_mirrored it then runs all-reduce steps across the workers
(through the servers being probed) and prints ``trained steps=N sum=S``; under strategy
``none`` a plain tf.distribute.Server serves and the task exits after the probe.
"""
import json
import os
import time
from pathlib import Path

import tensorflow as tf

probe = Path(os.environ["PROBE_DIR"])
task = os.environ["TFDIST_TASK"]
cfg = json.loads(os.environ["TF_CONFIG"])
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
port = cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]].rpartition(":")[2]

if os.environ.get("TFDIST_STRATEGY") == "none":
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
else:
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)

(probe / f"{task}.port.tmp").write_text(port)
(probe / f"{task}.port.tmp").rename(probe / f"{task}.port")
deadline = time.monotonic() + 120
while not (probe / "go").exists():
    if time.monotonic() > deadline:
        raise SystemExit("serve_probe: the test never said go")
    time.sleep(0.05)

if os.environ.get("TFDIST_STRATEGY") != "none":
    @tf.function
    def step():
        per_replica = strategy.run(lambda: tf.constant(1.0))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    steps = 5
    total = sum(float(step()) for _ in range(steps))
    print(f"trained steps={steps} sum={total}", flush=True)
