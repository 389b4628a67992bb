"""Per-job Python environments: a job's ``python.requirements`` built once per distinct
content under ``$TFDIST_HOME/envs/<key>`` and reused by every job that asks for the same.

Layering, not copying: a job environment is a small venv holding only the job's own
packages, plus one ``.pth`` file that appends tfdist's own site-packages *after* the job's.
The job's pins win; TensorFlow, tfdist and tfdist.runtime come from tfdist's environment,
so a build takes seconds and megabytes instead of minutes and gigabytes (TensorFlow alone is
over a gigabyte). :mod:`.plan` decides (pure), :mod:`.build` builds under a lock,
:mod:`.cache` lists and cleans.
"""

from __future__ import annotations

from tfdist.pyenv.build import ensure, record_use
from tfdist.pyenv.plan import Plan, plan_for, ray_packages, refuse_on_image

__all__ = ["Plan", "ensure", "plan_for", "ray_packages", "record_use", "refuse_on_image"]
