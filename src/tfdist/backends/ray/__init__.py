"""The Ray backend: :mod:`.plan` (pure: bundles, runtime_env, will the gang fit),
:mod:`.driver` (``RayBackend``, in the tfdist process) and :mod:`.actor` (the actor that runs
one task on its node; stdlib only, shipped by value).

Nothing is imported here: ``import tfdist.backends.ray.plan`` must not import Ray.
"""
