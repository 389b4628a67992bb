"""Per-job Python environments: a job's ``python.requirements`` built once per distinct
content under ``$TFDIST_HOME/envs/<key>`` and reused by every job that asks for the same.

Layering, not copying: a job environment is a small venv holding only the job's own
packages, plus one ``.pth`` file that appends tfdist's own site-packages *after* the job's.
The job's pins win; TensorFlow, tfdist and tfdist.runtime come from tfdist's environment,
so a build takes seconds and megabytes instead of minutes and gigabytes (TensorFlow alone is
over a gigabyte). :mod:`.plan` decides (pure), :mod:`.build` builds under a lock,
:mod:`.cache` lists and cleans.

Per backend: local tasks get the environment first on PATH (backends/local.py); Ray gets the
requirements as ``runtime_env`` ``pip`` (:func:`.plan.ray_packages`) and builds them on its nodes;
Kubernetes refuses them (:func:`.plan.refuse_on_image`: the image provides the environment).

Spark refuses them for now (one line naming spark.archives and spark.pyspark.python). To
build them there later: the cached environment cannot be shipped as it is, because its
layering ``.pth`` names tfdist's site-packages on *this* machine. Either (a) like Ray, hand
the requirement list to the executors and build there with :func:`.build.ensure` under their own
``$TFDIST_HOME`` (executors have tfdist installed), or (b) pack a self-contained environment
(``uv venv --relocatable`` + install, *without* :data:`~tfdist.pyenv.plan.LAYER_PTH`,
TensorFlow included) into a tar.gz and ship it with ``spark.archives`` (``env.tar.gz#env``),
tasks then running ``env/bin/python``. (a) is cheap when executors share tfdist's
environment; (b) when they do not. Bad input must still fail before anything starts: call
:func:`~tfdist.pyenv.build.resolve` in ``check()``.

Nothing is imported here, so each name has one import path (its module) and importing
:mod:`.plan` does not load the builder.
"""
