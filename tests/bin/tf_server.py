"""Start this task's tf.distribute.Server from TF_CONFIG, then exit 0 (tests port handling)."""
import json
import os

import tensorflow as tf

cfg = json.loads(os.environ["TF_CONFIG"])
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.distribute.Server(
    resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
    protocol="grpc", start=True,
)
print("serving", server.target, flush=True)
