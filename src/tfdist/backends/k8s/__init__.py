"""The Kubernetes backend, pure parts apart from I/O.

- :mod:`.names`: names, labels and addresses of a job's objects, and their checks.
- :mod:`.manifests`: the job as JobSet, TFJob or Indexed Jobs (``tfdist render``), and
  the bare pods tfdist supervises itself.
- :mod:`.pods`: what a pod's state means for its task (started, ended, exit code, reason).
- :mod:`.client`: thin helpers over the official client (requests without its generated
  methods, one-line errors).
- :mod:`.backend`: :class:`~.backend.KubernetesBackend`, pods supervised by tfdist.
- :mod:`.reaper`: deletes a run's objects should tfdist be killed.

Nothing here imports the ``kubernetes`` client at module level.
"""
