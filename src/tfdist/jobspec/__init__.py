"""The job's input, from what the user wrote to a checked :class:`~tfdist.jobspec.model.JobSpec`.

Read top to bottom, the flow is one pass through :mod:`.load`:

- :mod:`.yaml` reads a job file by YAML 1.2 within size and shape limits;
- :mod:`.text` keeps numbers as the text the user wrote, for commands and environments;
- :mod:`.tfjob` maps a Kubeflow TFJob to tfdist's keys (and writes one back), reading its
  values by Kubernetes' own rules (:mod:`.kube`);
- :mod:`.load` applies ``--set``, normalizes once and builds the job (also the quick form);
- :mod:`.model` holds the job's records, :mod:`.schema` the machinery that checks them.

Import the module that holds a name (``from tfdist.jobspec.model import JobSpec``,
``from tfdist.jobspec import load``): this package itself exports nothing.
"""
