"""Job management: the job store and what acts on recorded jobs.

``store`` (the SQLite history; typed records from ``records``, its failures named by cause in
``faults``), ``recorder`` + ``writer`` (a running job's records, written off the supervisor's
thread), ``fallback`` (the run directory's own record, where the store missed something),
``submit`` (detached jobs), ``preflight`` (the checks before a job starts, which ``submit``
and ``tfdist.api.run`` share), ``manage`` (stop, describe, clean, logs), ``handle`` (the Python
handle), ``liveness``, ``tensorboard`` and ``metrics``. Nothing here imports TensorFlow, Ray
or Kubernetes.
"""
