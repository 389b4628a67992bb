"""Job management: the job store and what acts on recorded jobs.

``store`` (the SQLite history), ``recorder`` (writes a running job to it), ``submit``
(detached jobs), ``manage`` (stop, describe, clean, logs), ``handle`` (the Python handle),
``tensorboard`` and ``metrics``. Nothing here imports TensorFlow, Ray or Kubernetes.
"""
